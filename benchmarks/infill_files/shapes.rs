//! Shapes for a plotting tool: areas, perimeters, bounding boxes, and a parser for a one-line format.

use std::fmt;
use std::str::FromStr;

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Point {
    pub x: f64,
    pub y: f64,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Shape {
    Circle { center: Point, radius: f64 },
    Rect { corner: Point, width: f64, height: f64 },
    Triangle { a: Point, b: Point, c: Point },
    Polygon { points: Vec<Point> },
}

#[derive(Debug, PartialEq)]
pub enum ParseError {
    Empty,
    UnknownKind(String),
    WrongCount { kind: String, expected: usize, got: usize },
    BadNumber(String),
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParseError::Empty => write!(f, "empty line"),
            ParseError::UnknownKind(kind) => write!(f, "unknown shape {kind:?}"),
            ParseError::WrongCount { kind, expected, got } => {
                write!(f, "{kind} takes {expected} numbers, got {got}")
            }
            ParseError::BadNumber(text) => write!(f, "not a number: {text:?}"),
        }
    }
}

fn distance(p: Point, q: Point) -> f64 {
    ((p.x - q.x).powi(2) + (p.y - q.y).powi(2)).sqrt()
}

impl Shape {
    /// The area enclosed, always positive.
    pub fn area(&self) -> f64 {
        match self {
            Shape::Circle { radius, .. } => std::f64::consts::PI * radius * radius,
            Shape::Rect { width, height, .. } => width * height,
            Shape::Triangle { a, b, c } => {
                ((b.x - a.x) * (c.y - a.y) - (c.x - a.x) * (b.y - a.y)).abs() / 2.0
            }
            Shape::Polygon { points } => {
                let n = points.len();
                let twice: f64 = (0..n)
                    .map(|i| points[i].x * points[(i + 1) % n].y - points[(i + 1) % n].x * points[i].y)
                    .sum();
                twice.abs() / 2.0
            }
        }
    }

    /// The length of the outline.
    pub fn perimeter(&self) -> f64 {
        match self {
            Shape::Circle { radius, .. } => 2.0 * std::f64::consts::PI * radius,
            Shape::Rect { width, height, .. } => 2.0 * (width + height),
            Shape::Triangle { a, b, c } => distance(*a, *b) + distance(*b, *c) + distance(*c, *a),
            Shape::Polygon { points } => {
                let n = points.len();
                (0..n).map(|i| distance(points[i], points[(i + 1) % n])).sum()
            }
        }
    }

    /// The smallest axis-aligned box that holds the shape: (lower left, upper right).
    pub fn bounds(&self) -> (Point, Point) {
        match self {
            Shape::Circle { center, radius } => (
                Point { x: center.x - radius, y: center.y - radius },
                Point { x: center.x + radius, y: center.y + radius },
            ),
            Shape::Rect { corner, width, height } => {
                (*corner, Point { x: corner.x + width, y: corner.y + height })
            }
            Shape::Triangle { a, b, c } => bounds_of(&[*a, *b, *c]),
            Shape::Polygon { points } => bounds_of(points),
        }
    }
}

fn bounds_of(points: &[Point]) -> (Point, Point) {
    let mut low = Point { x: f64::INFINITY, y: f64::INFINITY };
    let mut high = Point { x: f64::NEG_INFINITY, y: f64::NEG_INFINITY };
    for p in points {
        low.x = low.x.min(p.x);
        low.y = low.y.min(p.y);
        high.x = high.x.max(p.x);
        high.y = high.y.max(p.y);
    }
    (low, high)
}

fn numbers(kind: &str, fields: &[&str], expected: usize) -> Result<Vec<f64>, ParseError> {
    if fields.len() != expected {
        return Err(ParseError::WrongCount { kind: kind.to_string(), expected, got: fields.len() });
    }
    fields
        .iter()
        .map(|text| text.parse::<f64>().map_err(|_| ParseError::BadNumber(text.to_string())))
        .collect()
}

impl FromStr for Shape {
    type Err = ParseError;

    /// "circle X Y R", "rect X Y W H", "triangle AX AY BX BY CX CY".
    fn from_str(line: &str) -> Result<Self, Self::Err> {
        let mut fields = line.split_whitespace();
        let kind = fields.next().ok_or(ParseError::Empty)?;
        let rest: Vec<&str> = fields.collect();
        match kind {
            "circle" => {
                let v = numbers(kind, &rest, 3)?;
                Ok(Shape::Circle { center: Point { x: v[0], y: v[1] }, radius: v[2] })
            }
            "rect" => {
                let v = numbers(kind, &rest, 4)?;
                Ok(Shape::Rect { corner: Point { x: v[0], y: v[1] }, width: v[2], height: v[3] })
            }
            "triangle" => {
                let v = numbers(kind, &rest, 6)?;
                let p = |i: usize| Point { x: v[i], y: v[i + 1] };
                Ok(Shape::Triangle { a: p(0), b: p(2), c: p(4) })
            }
            other => Err(ParseError::UnknownKind(other.to_string())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rect_area_and_perimeter() {
        let rect: Shape = "rect 0 0 3 4".parse().unwrap();
        assert_eq!(rect.area(), 12.0);
        assert_eq!(rect.perimeter(), 14.0);
    }

    #[test]
    fn triangle_area() {
        let triangle: Shape = "triangle 0 0 4 0 0 3".parse().unwrap();
        assert_eq!(triangle.area(), 6.0);
        assert_eq!(triangle.perimeter(), 12.0);
    }

    #[test]
    fn circle_bounds() {
        let circle: Shape = "circle 1 1 2".parse().unwrap();
        let (low, high) = circle.bounds();
        assert_eq!(low, Point { x: -1.0, y: -1.0 });
        assert_eq!(high, Point { x: 3.0, y: 3.0 });
    }

    #[test]
    fn wrong_count_is_an_error() {
        let err = "circle 1 2".parse::<Shape>().unwrap_err();
        assert_eq!(err, ParseError::WrongCount { kind: "circle".to_string(), expected: 3, got: 2 });
    }

    #[test]
    fn unknown_kind_is_an_error() {
        let err = "hexagon 1 2 3".parse::<Shape>().unwrap_err();
        assert_eq!(err, ParseError::UnknownKind("hexagon".to_string()));
    }
}
